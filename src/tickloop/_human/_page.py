"""The approval pages, rendered on the server: everything a person reads is in the HTML.

JavaScript only adds live updates (server-sent events), answers without a page load and a
check of edits against the tool's schema while typing; without it the forms post and the
page reloads. Every value is escaped, and the page's own script runs only with the nonce
of its Content-Security-Policy, so a value that looks like markup stays text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote

from ._common import CallView, pretty
from ._question_form import question_form

__all__ = ["CallRow", "RunView", "render_index", "render_run"]


@dataclass(slots=True)
class RunView:
    run_id: str
    status: str
    created: float | None
    calls: int
    note: str | None = None  # e.g. why a resume by `serve --agent` failed


@dataclass(slots=True)
class CallRow:
    id: str
    tool: str | None
    status: str
    params: Any
    error: Any = None


def _q(value: str) -> str:
    return quote(value, safe="")


def _when(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _json_for_script(value: Any) -> str:
    """JSON inside <script type=application/json>: no `<` can close the element."""
    text = json.dumps(value, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _budget_card(view: CallView, limit: str, token: str) -> str:
    """A stored run's budget question (PROTOCOL §12): a form that grants more room."""
    key = escape(view.key)
    whole = limit not in ("cost", "wall_time")
    return (
        f'<article class="call budget" id="call-{key}" data-key="{key}">'
        f'<h3><span class="tool">budget</span> <code class="id">{escape(limit)}</code> '
        f'<span class="run">run {escape(view.run_id or "")}</span></h3>'
        f"<p>The run paused: its <b>{escape(limit)}</b> limit is used up and the budget "
        "hook deferred the question. Grant more; the amount is added to what is left.</p>"
        f'<form method="post" action="/decide" class="decide">'
        f'<input type="hidden" name="token" value="{escape(token)}">'
        f'<input type="hidden" name="run" value="{escape(view.run_id or "")}">'
        f'<input type="hidden" name="call" value="{escape(view.id)}">'
        f'<input name="value" type="number" min="0" step="{"1" if whole else "any"}" '
        f'required placeholder="amount" aria-label="amount of {escape(limit)}">'
        f'<button class="approve" name="action" value="grant">Grant more</button></form>'
        f'<div class="problem outcome" role="alert"></div>'
        f"</article>"
    )


def _call_card(view: CallView, token: str) -> str:
    if view.budget is not None:
        return _budget_card(view, view.budget, token)
    key = escape(view.key)
    run = f'<span class="run">run {escape(view.run_id)}</span>' if view.run_id else ""
    links = []
    if view.waits_on:
        links.append(
            "<dt>values from</dt><dd>"
            + ", ".join(f"<code>{escape(c)}</code>" for c in view.waits_on)
            + "</dd>"
        )
    if view.dependents:
        links.append(
            "<dt>waiting on it</dt><dd>"
            + ", ".join(f"<code>{escape(c)}</code>" for c in view.dependents)
            + "</dd>"
        )
    if view.arrows:
        links.append(
            '<dt>plan from here</dt><dd><ul class="plan-graph">'
            + "".join(
                f'<li class="arrow"><code>{escape(a)}</code> → <code>{escape(b)}</code></li>'
                for a, b in view.arrows
            )
            + "</ul></dd>"
        )
    if view.downstream:
        links.append(
            "<dt>approve all covers</dt><dd>"
            + ", ".join(f"<code>{escape(c)}</code>" for c in view.downstream)
            + "</dd>"
        )
    hidden = (
        f'<input type="hidden" name="token" value="{escape(token)}">'
        f'<input type="hidden" name="run" value="{escape(view.run_id or "")}">'
        f'<input type="hidden" name="call" value="{escape(view.id)}">'
    )
    if view.slot is not None:
        hidden += f'<input type="hidden" name="slot" value="{view.slot}">'

    params_text = escape(pretty(view.params))
    if view.question is not None and view.decided is None:
        actions = (
            question_form(view.question, hidden)
            + '<div class="problem outcome" role="alert"></div>'
        )
    elif view.decided is not None:
        actions = (
            f'<p class="decided">decided: <b>{escape(view.decided)}</b>; '
            "the run continues when it is resumed</p>"
        )
    else:
        editable = view.known_tool
        why = (
            ""
            if editable
            else '<p class="hint">Edit and Respond need the tool\'s schema: start '
            "<code>tickloop serve</code> with <code>--agent</code>.</p>"
        )
        edit_forms = (
            (
                f'<details class="edit"><summary>Edit</summary>'
                f'<form method="post" action="/decide" class="decide" data-check="params">{hidden}'
                f'<textarea name="params" rows="{min(18, params_text.count(chr(10)) + 3)}" '
                f'spellcheck="false">{params_text}</textarea>'
                f'<div class="problem" role="alert"></div>'
                f'<button name="action" value="edit">Run with these parameters</button>'
                f"</form></details>"
                f'<details class="respond"><summary>Respond</summary>'
                f'<form method="post" action="/decide" class="decide" data-check="output">{hidden}'
                f'<textarea name="value" rows="4" spellcheck="false"></textarea>'
                f'<div class="problem" role="alert"></div>'
                f'<button name="action" value="respond">Use as the result</button>'
                f"</form></details>"
            )
            if editable
            else ""
        )
        actions = (
            f'<div class="buttons">'
            f'<form method="post" action="/decide" class="decide">{hidden}'
            f'<button class="approve" name="action" value="approve">Approve</button></form>'
            + (
                f'<form method="post" action="/decide" class="decide">{hidden}'
                f'<button class="approve all" name="action" value="approve_all" '
                f'title="{escape("approves " + ", ".join([view.id, *view.downstream]))}">'
                f"Approve all of these ({1 + len(view.downstream)} calls)</button></form>"
                if view.downstream
                else ""
            )
            + f'<form method="post" action="/decide" class="decide deny">{hidden}'
            f'<input name="reason" placeholder="reason (told to the model)" size="34">'
            f'<button class="deny" name="action" value="deny">Deny</button></form>'
            f"</div>{edit_forms}{why}"
            f'<div class="problem outcome" role="alert"></div>'
        )
    schemas = _json_for_script({"params": view.schema, "output": view.output_schema})
    return (
        f'<article class="call" id="call-{key}" data-key="{key}">'
        f'<h3><code class="id">{escape(view.id)}</code> <span class="tool">'
        f"{escape(view.tool or '?')}</span> {run}</h3>"
        f'<pre class="params">{params_text}</pre>'
        f'<dl class="links">{"".join(links)}</dl>'
        f"{actions}"
        f'<script type="application/json" class="schemas">{schemas}</script>'
        f"</article>"
    )


def _runs_table(runs: list[RunView], token: str) -> str:
    if not runs:
        return '<p class="empty">No runs yet.</p>'
    rows = []
    for run in runs:
        note = f'<div class="note">{escape(run.note)}</div>' if run.note else ""
        rows.append(
            f'<tr class="run-row {escape(run.status)}"><td><a href="/runs/{_q(run.run_id)}?'
            f'token={_q(token)}">{escape(run.run_id)}</a>{note}</td>'
            f'<td class="status">{escape(run.status)}</td><td>{escape(_when(run.created))}</td>'
            f"<td>{run.calls}</td></tr>"
        )
    return (
        "<table><thead><tr><th>run</th><th>status</th><th>started</th><th>calls</th></tr>"
        f"</thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _page(title: str, body: str, nonce: str, flash: str | None, flash_kind: str) -> str:
    banner = (
        f'<div id="flash" class="{escape(flash_kind)}" role="status">{escape(flash)}</div>'
        if flash
        else '<div id="flash" role="status"></div>'
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>"
        f'<header><b>tickloop</b> · {escape(title)}<span id="live" title="live updates">'
        f"</span></header><main>{banner}{body}</main>"
        f'<script nonce="{escape(nonce)}">{_SCRIPT}</script></body></html>'
    )


def render_index(
    *,
    title: str,
    runs: list[RunView],
    pending: list[CallView],
    token: str,
    nonce: str,
    flash: str | None = None,
    flash_kind: str = "ok",
) -> str:
    waiting = [view for view in pending if view.decided is None]
    cards = "".join(_call_card(view, token) for view in pending)
    body = (
        f'<section id="pending" data-live><h2>Waiting for a decision '
        f'<span class="count">{len(waiting)}</span></h2>'
        f"{cards or '<p class=empty>Nothing is waiting for a decision.</p>'}</section>"
        f'<section id="runs" data-live data-replace><h2>Runs</h2>'
        f"{_runs_table(runs, token)}</section>"
    )
    return _page(title, body, nonce, flash, flash_kind)


def render_run(
    *,
    title: str,
    run: RunView,
    calls: list[CallRow],
    pending: list[CallView],
    token: str,
    nonce: str,
    flash: str | None = None,
    flash_kind: str = "ok",
) -> str:
    rows = []
    for call in calls:
        error = ""
        if isinstance(call.error, dict):
            error = f'<div class="error">{escape(str(call.error.get("message", "")))}</div>'
        rows.append(
            f'<tr class="{escape(call.status)}"><td><code>{escape(call.id)}</code></td>'
            f"<td>{escape(call.tool or '?')}</td><td class=status>{escape(call.status)}</td>"
            f'<td><pre class="small">{escape(pretty(call.params))}</pre>{error}</td></tr>'
        )
    cards = "".join(_call_card(view, token) for view in pending)
    body = (
        f'<p><a href="/?token={_q(token)}">← all runs</a></p>'
        f'<section id="summary" data-live data-replace><h2>Run {escape(run.run_id)} '
        f'<span class="status {escape(run.status)}">{escape(run.status)}</span></h2>'
        f"{'<p class=note>' + escape(run.note) + '</p>' if run.note else ''}</section>"
        f'<section id="pending" data-live>{cards}</section>'
        f'<section id="timeline-box"><iframe id="timeline" title="timeline" '
        f'src="/runs/{_q(run.run_id)}/timeline?token={_q(token)}"></iframe></section>'
        f'<section id="calls" data-live data-replace><h2>Calls</h2><table><thead><tr>'
        f"<th>call</th><th>tool</th><th>status</th><th>parameters</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )
    return _page(title, body, nonce, flash, flash_kind)


_STYLE = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#1d232b;
background:#f4f6f8}
header{background:#1d2733;color:#fff;padding:10px 18px;font-size:15px}
#live{display:inline-block;width:9px;height:9px;border-radius:50%;margin-left:10px;
background:#777}
#live.on{background:#3fbf6a}
main{max-width:1060px;margin:0 auto;padding:8px 18px 40px}
h2{font-size:17px;margin:18px 0 8px}
h2 .count{background:#e07b12;color:#fff;border-radius:9px;padding:0 8px;font-size:13px}
.call{background:#fff;border:1px solid #d5dbe2;border-left:5px solid #e0a312;
border-radius:6px;padding:10px 14px;margin:10px 0}
.call h3{margin:0 0 6px;font-size:15px}
.call .tool{font-weight:600}
.call .run{color:#59636e;font-weight:normal;font-size:13px;margin-left:8px}
pre{background:#f6f8fa;border:1px solid #e3e7ec;border-radius:4px;padding:8px;margin:6px 0;
overflow:auto;max-height:320px;white-space:pre-wrap;word-break:break-word}
pre.small{max-height:120px;padding:4px;margin:0;font-size:12px}
dl.links{margin:4px 0;display:grid;grid-template-columns:max-content auto;gap:2px 10px}
dl.links dt{color:#59636e}dl.links dd{margin:0}
.buttons{display:flex;gap:12px;flex-wrap:wrap;align-items:center;margin:8px 0}
form{margin:0}
button{font:inherit;border:1px solid #9aa3ad;background:#fff;border-radius:4px;
padding:4px 12px;cursor:pointer}
button.approve{background:#2f6fd6;border-color:#2f6fd6;color:#fff}
button.deny{border-color:#d33a2c;color:#d33a2c}
input[name=reason]{font:inherit;padding:3px 6px;border:1px solid #c5ccd4;border-radius:4px;
margin-right:6px}
details{margin:6px 0}summary{cursor:pointer;color:#2f6fd6}
textarea{width:100%;font:12.5px/1.4 ui-monospace,Menlo,Consolas,monospace;border:1px solid
#c5ccd4;border-radius:4px;padding:6px}
textarea.bad{border-color:#d33a2c;background:#fff6f5}
.problem{color:#b3261e;white-space:pre-wrap;margin:4px 0}
.decided{color:#2f6f3a}
.hint{color:#59636e;font-size:13px}
#flash{margin:10px 0;padding:0}
#flash.ok,#flash.refused{padding:8px 12px;border-radius:5px}
#flash.ok{background:#e6f4ea;color:#1e6b34}
#flash.refused{background:#fdecea;color:#b3261e}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #d5dbe2}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #eef1f4;vertical-align:top}
th{background:#eef1f4;font-weight:600}
td.status,span.status{font-weight:600}
.paused td.status,span.status.paused,.deferred td.status{color:#e07b12}
.done td.status,span.status.done{color:#2f6f3a}
.failed td.status,.denied td.status,.invalid td.status,span.status.failed{color:#d33a2c}
.note,.error{color:#b3261e;font-size:12.5px}
.empty{color:#59636e}
iframe#timeline{width:100%;height:420px;border:1px solid #d5dbe2;border-radius:6px;
background:#fff}
"""

_SCRIPT = r"""
(function(){
"use strict";
function typeOf(v){if(v===null)return"null";if(Array.isArray(v))return"array";
 if(typeof v==="number")return Number.isInteger(v)?"integer":"number";return typeof v;}
function fits(t,v){var k=typeOf(v);return t===k||(t==="number"&&k==="integer");}
function check(s,v,path,out){
 if(s===true||s===null||s===undefined||typeof s!=="object")return;
 var at=path.length?"at "+path.join("/")+": ":"";
 if(s.type!==undefined){var ts=Array.isArray(s.type)?s.type:[s.type];
  if(!ts.some(function(t){return fits(t,v);})){
   out.push(at+JSON.stringify(v)+" is not of type "+ts.join(" or "));return;}}
 if(s.enum&&!s.enum.some(function(e){return JSON.stringify(e)===JSON.stringify(v);}))
  out.push(at+JSON.stringify(v)+" is not one of "+JSON.stringify(s.enum));
 if(s["const"]!==undefined&&JSON.stringify(s["const"])!==JSON.stringify(v))
  out.push(at+"must be "+JSON.stringify(s["const"]));
 if(typeof v==="number"){
  if(s.minimum!==undefined&&v<s.minimum)out.push(at+v+" is less than the minimum of "+s.minimum);
  if(s.maximum!==undefined&&v>s.maximum)out.push(at+v+" is more than the maximum of "+s.maximum);}
 if(typeof v==="string"){
  if(s.minLength!==undefined&&v.length<s.minLength)out.push(at+"is shorter than "+s.minLength);
  if(s.maxLength!==undefined&&v.length>s.maxLength)out.push(at+"is longer than "+s.maxLength);}
 if(typeOf(v)==="object"){
  (s.required||[]).forEach(function(r){
   if(!(r in v))out.push(at+"'"+r+"' is a required property");});
  var props=s.properties||{};
  Object.keys(v).forEach(function(k){
   if(k in props)check(props[k],v[k],path.concat([k]),out);
   else if(s.additionalProperties===false)out.push(at+"'"+k+"' is not allowed");
   else if(typeof s.additionalProperties==="object")
    check(s.additionalProperties,v[k],path.concat([k]),out);});}
 if(typeOf(v)==="array"&&s.items&&typeof s.items==="object")
  v.forEach(function(x,i){check(s.items,x,path.concat([i]),out);});
}
function problemsOf(form){
 var kind=form.getAttribute("data-check");if(!kind)return [];
 var card=form.closest(".call");var schemas={};
 try{schemas=JSON.parse(card.querySelector("script.schemas").textContent);}catch(e){}
 var area=form.querySelector("textarea");var value;
 try{value=JSON.parse(area.value);}catch(e){return ["not JSON: "+e.message];}
 if(kind==="params"&&typeOf(value)!=="object")return ["the parameters must be a JSON object"];
 var out=[];check(kind==="params"?schemas.params:schemas.output,value,[],out);return out;
}
function showProblems(form){
 var out=problemsOf(form);var box=form.querySelector(".problem");
 var area=form.querySelector("textarea");
 if(box)box.textContent=out.length?"does not match the tool's schema: "+out.join("; "):"";
 if(area)area.classList.toggle("bad",out.length>0);
 return out;
}
document.addEventListener("input",function(ev){
 var form=ev.target.closest&&ev.target.closest("form[data-check]");
 if(form)showProblems(form);});
document.addEventListener("submit",function(ev){
 var form=ev.target;if(!form.classList||!form.classList.contains("decide"))return;
 ev.preventDefault();
 if(showProblems(form).length)return;
 var data=new FormData(form);var button=ev.submitter;
 if(button&&button.name)data.set(button.name,button.value);
 var card=form.closest(".call");
 var outcome=card.querySelector(".outcome")||form.querySelector(".problem");
 fetch(form.getAttribute("action"),{method:"POST",body:new URLSearchParams(data),
  headers:{"Accept":"application/json"},credentials:"same-origin"})
 .then(function(r){return r.json().then(function(j){return [r.ok,j];});})
 .then(function(res){
  var ok=res[0],j=res[1];
  if(ok){card.classList.add("gone");card.remove();flash(j.message,"ok");refresh();}
  else{var box=form.querySelector(".problem")||outcome;box.textContent=j.error;
   flash(j.error,"refused");}})
 .catch(function(e){outcome.textContent="could not send: "+e;});
});
function flash(text,kind){var f=document.getElementById("flash");
 f.textContent=text||"";f.className=text?kind:"";}
var busy=false,again=false;
function refresh(){
 if(busy){again=true;return;}busy=true;
 fetch(location.href,{headers:{"Accept":"text/html"},credentials:"same-origin"})
 .then(function(r){return r.text();}).then(function(text){
  var doc=new DOMParser().parseFromString(text,"text/html");
  document.querySelectorAll("[data-live]").forEach(function(section){
   var fresh=doc.getElementById(section.id);if(!fresh)return;
   if(section.hasAttribute("data-replace")){section.innerHTML=fresh.innerHTML;return;}
   var keep={};section.querySelectorAll(".call").forEach(function(c){keep[c.id]=c;});
   var want={};fresh.querySelectorAll(".call").forEach(function(c){want[c.id]=c;});
   Object.keys(keep).forEach(function(id){if(!want[id])keep[id].remove();});
   Object.keys(want).forEach(function(id){if(!keep[id])section.appendChild(document.importNode(want[id],true));});
   var h=section.querySelector("h2"),fh=fresh.querySelector("h2");if(h&&fh)h.innerHTML=fh.innerHTML;
   var empty=section.querySelector(".empty"),fe=fresh.querySelector(".empty");
   if(empty&&!fe)empty.remove();if(fe&&!empty)section.appendChild(document.importNode(fe,true));
  });
  var frame=document.getElementById("timeline");
  if(frame){frame.src=frame.src;}
 }).finally(function(){busy=false;if(again){again=false;refresh();}});
}
var token=new URLSearchParams(location.search).get("token")||"";
if(window.EventSource){
 var es=new EventSource("/events?token="+encodeURIComponent(token));
 var dot=document.getElementById("live");
 // What changed between rendering this page and connecting is fetched once on open.
 es.onopen=function(){dot.className="on";refresh();};
 es.onerror=function(){dot.className="";};
 es.onmessage=function(){refresh();};
}
})();
"""
