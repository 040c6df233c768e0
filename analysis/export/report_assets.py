"""Inline style and script of the HTML report (kept apart from the Python that fills it in).

The script reads ``#zym-data`` (``{flame: tree}``) and draws the flamegraph as positioned
``div``s: the focused frame spans the full width, its ancestors are drawn above it, and each
child's width is its share of GPU time. It never uses ``innerHTML`` on trace data.
"""

STYLE = r"""
:root{--fg:#1d2330;--muted:#5b6475;--line:#dde2ea;--bg:#fff;--panel:#f6f8fb;
--err:#b3261e;--warn:#b26a00;--info:#1f5fa8}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);
background:var(--bg)}
header.top{position:sticky;top:0;z-index:5;background:#17202e;color:#fff;padding:10px 24px;
display:flex;align-items:baseline;gap:24px;flex-wrap:wrap}
header.top h1{font-size:18px;margin:0}header.top h1 span{font-weight:400;color:#b9c3d3;margin-left:8px}
header.top nav a{color:#cfe0ff;margin-right:16px;text-decoration:none}
main{padding:8px 24px 24px;max-width:1400px}
h2{font-size:17px;margin:28px 0 10px;border-bottom:1px solid var(--line);padding-bottom:4px}
h2 small{font-weight:400;color:var(--muted);font-size:13px;margin-left:8px}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
table{border-collapse:collapse}
table.kv th{text-align:left;color:var(--muted);font-weight:500;padding:2px 16px 2px 0;
vertical-align:top;white-space:nowrap}
table.kv td{padding:2px 0}
.finding{border:1px solid var(--line);border-left:5px solid var(--info);border-radius:6px;
padding:10px 14px;margin:10px 0;background:var(--panel)}
.finding header{display:flex;align-items:center;gap:10px;flex-wrap:wrap}
.finding h3{margin:0;font-size:15px}
.finding .rule{color:var(--muted)}
.finding p{margin:6px 0}.finding .site{color:var(--muted)}
.finding .chain{color:var(--muted);font-size:12.5px}
.badge{font-size:11px;text-transform:uppercase;letter-spacing:.04em;color:#fff;
background:var(--info);border-radius:3px;padding:1px 6px}
.sev-error{border-left-color:var(--err)}.sev-error .badge{background:var(--err)}
.sev-warning{border-left-color:var(--warn)}.sev-warning .badge{background:var(--warn)}
.fix{background:#eaf5ea;border-radius:4px;padding:6px 8px}
details summary{cursor:pointer;color:var(--info)}
table.paths{width:100%;font-size:13px;margin-bottom:12px}
table.paths th,table.paths td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left}
table.paths th{background:var(--panel);font-weight:600}
table.paths .num{text-align:right;white-space:nowrap}
table.paths td.op{max-width:360px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;
font:12px ui-monospace,Menlo,Consolas,monospace;color:var(--muted)}
.none{color:var(--muted)}
.flame-tools{display:flex;gap:12px;align-items:center;margin-bottom:6px}
#flame-search{width:320px;padding:4px 8px;border:1px solid var(--line);border-radius:4px}
#flame-status{color:var(--muted)}
#flame{position:relative;width:100%;min-height:60px;border:1px solid var(--line);
border-radius:4px;overflow:hidden;background:#fbfcfe}
#flame .fr{position:absolute;height:19px;overflow:hidden;white-space:nowrap;font-size:11.5px;
line-height:19px;padding:0 4px;border-right:1px solid #fff;border-bottom:1px solid #fff;
cursor:pointer;color:#1b1b1b;text-overflow:ellipsis}
#flame .fr:hover{filter:brightness(.92)}
#flame .fr.anc{opacity:.55}
#flame .fr.hit{outline:2px solid #d400d4;outline-offset:-2px}
#flame .fr.dim{opacity:.35}
#flame-tip{position:fixed;z-index:10;pointer-events:none;background:#17202e;color:#fff;
padding:6px 9px;border-radius:4px;font-size:12px;max-width:560px;word-break:break-all}
footer{color:var(--muted);font-size:12px;padding:16px 24px;border-top:1px solid var(--line)}
"""

SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("zym-data").textContent);
  var root = data.flame, box = document.getElementById("flame");
  var tip = document.getElementById("flame-tip"), status = document.getElementById("flame-status");
  var search = document.getElementById("flame-search");
  var ROW = 20, focus = root, query = "";
  (function prep(n, parent, depth) {
    n.p = parent; n.d = depth;
    for (var i = 0; i < n.c.length; i++) prep(n.c[i], n, depth + 1);
  })(root, null, 0);
  var HUES = {python: [28, 85, 70], native: [40, 70, 72], torch_op: [75, 60, 62], nvtx: [150, 50, 66],
              cuda_api: [205, 70, 72], kernel: [0, 72, 70], copy: [275, 55, 74],
              memset: [300, 45, 78], sync: [180, 40, 70], unknown: [0, 0, 80], root: [220, 10, 85]};
  function color(n) {
    var h = HUES[n.k] || HUES.python, jitter = 0;
    for (var i = 0; i < n.n.length; i++) jitter = (jitter * 31 + n.n.charCodeAt(i)) % 17;
    return "hsl(" + (h[0] + jitter - 8) + "," + h[1] + "%," + h[2] + "%)";
  }
  function fmt(ns) {
    return ns >= 1e6 ? (ns / 1e6).toFixed(2) + " ms" : (ns / 1e3).toFixed(1) + " \u00b5s";
  }
  function pct(a, b) { return b > 0 ? (100 * a / b).toFixed(1) + "%" : "0%"; }
  function matches(n) { return query && n.n.toLowerCase().indexOf(query) >= 0; }
  function draw(frag, n, x, w, depth, ancestor, width) {
    var el = document.createElement("div");
    el.className = "fr" + (ancestor ? " anc" : "") + (query ? (matches(n) ? " hit" : " dim") : "");
    el.style.left = (100 * x) + "%";
    el.style.width = (100 * w) + "%";
    el.style.top = (depth * ROW) + "px";
    el.style.background = color(n);
    if (w * width > 28) el.textContent = n.n;
    el.addEventListener("click", function () { focus = n; render(); });
    el.addEventListener("mousemove", function (e) { showTip(e, n); });
    el.addEventListener("mouseleave", function () { tip.hidden = true; });
    frag.appendChild(el);
  }
  function showTip(e, n) {
    tip.textContent = "";
    var lines = [n.n, (n.f ? n.f + " \u00b7 " : "") + fmt(n.v) + " GPU time",
                 pct(n.v, root.v) + " of all GPU time" + (focus !== root ? ", " + pct(n.v, focus.v) + " of the zoomed frame" : "")];
    for (var i = 0; i < lines.length; i++) {
      var d = document.createElement("div"); d.textContent = lines[i];
      if (i === 0) d.style.fontWeight = "600";
      tip.appendChild(d);
    }
    tip.hidden = false;
    tip.style.left = Math.min(e.clientX + 14, window.innerWidth - 580) + "px";
    tip.style.top = (e.clientY + 14) + "px";
  }
  function render() {
    var width = box.clientWidth || 1000, frag = document.createDocumentFragment();
    var chain = [], a, maxDepth = 0, hit = 0;
    for (a = focus.p; a; a = a.p) chain.unshift(a);
    for (var i = 0; i < chain.length; i++) draw(frag, chain[i], 0, 1, i, true, width);
    (function walk(n, x, w, depth) {
      draw(frag, n, x, w, depth, false, width);
      if (depth > maxDepth) maxDepth = depth;
      if (matches(n)) { hit += n.v; return walkRest(n, x, w, depth); }
      walkRest(n, x, w, depth);
    })(focus, 0, 1, chain.length);
    function walkRest(n, x, w, depth) {
      var cx = x;
      for (var j = 0; j < n.c.length; j++) {
        var c = n.c[j], cw = n.v > 0 ? w * c.v / n.v : 0;
        if (cw * width >= 0.5) walkInner(c, cx, cw, depth + 1);
        cx += cw;
      }
    }
    function walkInner(n, x, w, depth) {
      draw(frag, n, x, w, depth, false, width);
      if (depth > maxDepth) maxDepth = depth;
      if (matches(n) && !hasMatchingAncestor(n)) hit += n.v;
      walkRest(n, x, w, depth);
    }
    box.textContent = "";
    box.style.height = ((maxDepth + 1) * ROW + 2) + "px";
    box.appendChild(frag);
    status.textContent = (focus === root ? "" : "zoomed: " + focus.n + " \u00b7 ") +
      (query ? "matches: " + pct(hit, focus.v) + " of " + fmt(focus.v) : fmt(focus.v) + " of GPU time");
  }
  function hasMatchingAncestor(n) {
    for (var a = n.p; a && a !== focus.p; a = a.p) if (matches(a)) return true;
    return false;
  }
  search.addEventListener("input", function () { query = search.value.trim().toLowerCase(); render(); });
  window.addEventListener("resize", render);
  render();
})();
"""
