"""A generated catalog of 300 tools in five domains (issue 43, tool search): four are
served by MCP servers (`mcp_catalog_server.py`), one is Python tools.

Each domain has ten entities and six verbs: `billing_refund_create` "Create a refund in
the billing system: ...". Deterministic, so request sizes are the same every run.
"""

from __future__ import annotations

DOMAINS: dict[str, list[str]] = {
    "billing": [
        "invoice",
        "payment",
        "refund",
        "subscription",
        "coupon",
        "tax_rate",
        "credit_note",
        "payout",
        "dispute",
        "price",
    ],
    "crm": [
        "contact",
        "lead",
        "deal",
        "account",
        "note",
        "task",
        "meeting",
        "campaign",
        "segment",
        "pipeline",
    ],
    "docs": [
        "page",
        "folder",
        "comment",
        "template",
        "space",
        "attachment",
        "revision",
        "label",
        "draft",
        "export",
    ],
    "devops": [
        "deployment",
        "cluster",
        "alert",
        "incident",
        "secret",
        "build",
        "container",
        "volume",
        "dns_record",
        "certificate",
    ],
    "travel": [
        "flight",
        "hotel",
        "car_rental",
        "trip",
        "visa",
        "seat",
        "baggage",
        "lounge",
        "itinerary",
        "insurance",
    ],
}
VERBS = {
    "create": "Create a new {what} in the {domain} system from the given fields.",
    "get": "Get one {what} of the {domain} system by its id, with every field.",
    "list": "List the {what}s of the {domain} system that match the given fields.",
    "update": "Update the given fields of one {what} in the {domain} system.",
    "delete": "Delete one {what} from the {domain} system for good.",
    "archive": "Archive one {what} of the {domain} system, keeping its history.",
}


def entries(domain: str) -> list[tuple[str, str]]:
    """(name, description) of every tool of a domain, in a fixed order."""
    found = []
    for entity in DOMAINS[domain]:
        what = entity.replace("_", " ")
        for verb, text in VERBS.items():
            description = text.format(what=what, domain=domain) + (
                " Pass dry_run to check without changing anything; limit caps how many "
                "related records come back."
            )
            found.append((f"{domain}_{entity}_{verb}", description))
    return found
