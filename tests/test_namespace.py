"""What `import tickloop` shows a user: `dir(tickloop)` is the public API (`__all__`),
with none of the helpers the package's loader uses (issue 30 item 8)."""

from __future__ import annotations

import subprocess
import sys


def test_dir_lists_the_public_names_and_nothing_else() -> None:
    import tickloop as tl

    assert dir(tl) == sorted(tl.__all__)
    tl.Agent  # noqa: B018 - a name loaded on first use stays listed once, as before
    assert dir(tl) == sorted(tl.__all__)


def test_no_helper_of_the_loader_is_a_public_attribute() -> None:
    """Only public names, dunders and private (underscored) names at module level: no
    `Any`, `TYPE_CHECKING`, `import_module` or `annotations` a user could come to use."""
    probe = (
        "import tickloop as tl\n"
        "print(' '.join(n for n in vars(tl) if not n.startswith('_') and n not in tl.__all__))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == []


def test_the_version_is_one_the_package_says_and_the_build_and_changelog_use() -> None:
    """`pip show tickloop` and `tickloop.__version__` agree, and the changelog's newest
    heading names the same version (issue 44: they said 0.1.0 and 0.3.0)."""
    import re
    from pathlib import Path

    from hatchling.metadata.core import ProjectMetadata
    from hatchling.plugin.manager import PluginManager

    import tickloop as tl

    root = Path(__file__).resolve().parent.parent
    built = ProjectMetadata(str(root), PluginManager()).version  # what a wheel gets
    assert built == tl.__version__
    changelog = (root / "CHANGELOG.md").read_text()
    newest = re.search(r"^## .*?(\d+\.\d+\.\d+)", changelog, re.MULTILINE)
    assert newest is not None and newest.group(1) == tl.__version__
