"""The Jinja2 template of the evaluation report (kept in a module so it ships with the code).

Everything the template prints is escaped by Jinja2's autoescaping, except the base64 PNG
data URIs it builds itself. Layout rules that the browser test checks: the page never scrolls
sideways in a 1,280-pixel window (the body is at most 1,180 px wide, long words wrap, images
shrink), and the wide tables scroll inside their own box (``.scroll``) with the first,
identifying column fixed (``position: sticky``).
"""

from __future__ import annotations

__all__ = ["CSS", "TEMPLATE"]

CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;max-width:1180px;
padding:1.2em 2em;color:#1b1b1b;line-height:1.45;overflow-wrap:break-word}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:separate;border-spacing:0;font-size:.82em;margin:.6em 0}
th,td{border:1px solid #d6d6d6;border-width:0 1px 1px 0;padding:.25em .5em;text-align:right;vertical-align:top;background:#fff}
tr>:first-child{border-left-width:1px}tr:first-child>*{border-top-width:1px}
th{background:#f3f3f3}td.l,th.l{text-align:left}
.scroll{max-width:100%;overflow-x:auto;border:1px solid #e4e4e4;margin:.6em 0}
.scroll table{margin:0}
.scroll td,.scroll th{white-space:nowrap;overflow-wrap:normal}
.scroll td.wrap{white-space:normal;min-width:12em;max-width:26em}
.scroll .id{position:sticky;left:0;z-index:1;white-space:normal;min-width:12em;max-width:17em;
overflow-wrap:anywhere;box-shadow:2px 0 2px -1px rgba(0,0,0,.18)}
tr.pareto td{background:#eef8ee}tr.infeasible td{color:#888}
th.weak,td.weak{background:#f6f0f0;color:#8a6d6d;font-style:italic}
.box{border:2px solid #2c7a2c;border-radius:6px;padding:.6em 1em;background:#f6fbf6}
.warn{border-color:#b36b00;background:#fff8ec}
.muted{color:#666;font-size:.9em}figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
code{background:#f4f4f4;padding:0 .2em;white-space:nowrap}details{margin:.3em 0}
table.kv td{overflow-wrap:anywhere}
"""

TEMPLATE = """{% macro kv_table(items) -%}
<table class="kv">{% for k, v in items %}<tr><th class='l'>{{ k }}</th><td class='l'>{{ v }}</td></tr>{% endfor %}</table>
{%- endmacro %}<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title><style>{{ css|safe }}</style></head>
<body>
<h1>{{ title }}</h1>
<p class="muted">privembed {{ version }} · generated {{ now }} · {{ n_configs }} configurations × {{ runs }} runs</p>
{% for n in notes %}<div class="box warn">{{ n }}</div>
{% endfor %}
{% if deployment %}<h2>Deployment recommendation</h2>
<div class="box" id="deployment">
<p><b>{{ deployment.sentence }}</b></p>
<p class="muted">The same recommendation as <code>privembed advise</code> for these embeddings (saved
as <code>advice.json</code>): per deployment mode, the smallest ε whose search meets {{ deployment.floor }},
with what a query costs. The sweep below judges plain protected vectors only.</p>
<div class="scroll"><table id="deployment-modes">
<tr><th class="l id">mode / law</th><th>ε</th><th>k'</th><th>recall</th><th class="l">guarantee</th><th class="l">cost per query</th><th class="l">note</th></tr>
{% for row in deployment.rows %}<tr class="{% if row.recommended %}pareto{% elif not row.meets %}infeasible{% endif %}"><td class="l id">{% if row.recommended %}★ {% endif %}{{ row.label }}</td><td>{{ row.epsilon }}</td><td>{{ row.depth }}</td><td>{{ row.utility }}</td><td class="l">{{ row.guarantee }}</td><td class="l">{{ row.cost }}</td><td class="l muted">{{ row.note }}</td></tr>
{% endfor %}</table></div>
{% if deployment.verdicts %}{% if deployment.one_reason %}<p class="muted">{{ deployment.one_reason }}</p>{% endif %}<ul id="deployment-threats">
{% for v in deployment.verdicts %}<li>against {{ v.threat }}: <b>{{ v.verdict }}</b>{% if not deployment.one_reason %} <span class="muted">— {{ v.reason }}</span>{% endif %}</li>
{% endfor %}</ul>{% endif %}
</div>
{% endif %}<h2>{% if deployment %}Plain protected vectors: the sweep's recommendation{% else %}Recommendation{% endif %}</h2>
<div class="box{% if not rec.feasible %} warn{% endif %}" id="recommendation">
<p><b>{{ sentence }}</b></p>
{% if rec.feasible %}<ul>
{% for item in recommended %}<li><b>{{ item.label }}</b> — {{ item.numbers }}<br><span class="muted">guarantee: {{ item.guarantee }}</span></li>
{% endfor %}</ul>
{% else %}<ul>
{% for line in nearest %}<li>{{ line }}</li>
{% endfor %}</ul>
{% if nearest %}<p class="muted">Relax the floor or the ceiling, or accept one side: these are the
configurations nearest to meeting both (smallest total shortfall, in each metric's units).</p>{% endif %}
{% endif %}
{% for line in rec.ignored %}<p class="muted">{{ line }}</p>
{% endfor %}<p class="muted">{{ rec.note }}</p>
</div>
<h2>Are the attacks strong enough?</h2>
{% if checks %}<p class="muted">Every attack was first run on the unprotected embeddings and compared with
a blind attacker (one that never looks at the vectors). An attack that does not beat the blind one there,
with a 95% interval excluding it, proves nothing about the protection: its numbers are labelled
“{{ weak_label }}” below, are not plotted as leakage and set no ceiling.</p>
<div class="scroll"><table id="attack-checks">
<tr><th class="l id">attack</th><th class="l">statistic</th><th>unprotected</th><th>blind attacker</th>
<th>95% interval of the difference</th><th class="l">verdict</th><th class="l">interval</th></tr>
{% for c in checks %}<tr><td class="l id">{{ c.attack }}</td><td class="l">{{ c.statistic }}</td>
<td>{{ c.value }}</td><td>{{ c.chance }}</td><td>{{ c.interval }}</td>
<td class="l{% if not c.passed %} weak{% endif %}">{{ c.verdict }}</td><td class="l wrap">{{ c.method }}</td></tr>
{% endfor %}</table></div>
{% else %}<div class="box warn">No attack was run on these releases (pass texts for token inference,
or keep the linkage attack on): the privacy side of this report is the formal guarantee only.</div>
{% endif %}
<h2>Data</h2>
{{ kv_table(data) }}
<h2>Trade-off plots</h2>
{% for f in figures %}<figure><img src="data:image/png;base64,{{ f.b64 }}" alt="{{ f.alt }}">
<figcaption class="muted">{{ f.caption }} Also written alone: {% for n in f.files %}<code>{{ n }}</code>{% if not loop.last %}, {% endif %}{% endfor %}.</figcaption></figure>
{% endfor %}
<h2>All configurations</h2>
<p class="muted">Mean ± sample standard deviation over runs. ★ / green: recommended; grey: misses
the floor or the ceiling; italic columns: an attack too weak to be evidence. Every number stands
beside the guarantee its configuration gives for one release of a record (repeated fresh releases
compose: see the ledger). The table scrolls sideways inside its box; the configuration column stays.</p>
<div class="scroll" id="configurations"><table>
<tr><th class="l id">configuration</th><th class="l">formal guarantee (one release)</th>
{% for m in metric_heads %}<th class="{{ m.cls }}" title="{{ m.title }}">{{ m.name }}{% if m.weak %} ⚠{% endif %}</th>{% endfor %}</tr>
<tr data-config="unprotected"><td class="l id">unprotected</td><td class="l">no protection</td>
{% for v in baseline_cells %}<td class="{{ v.cls }}">{{ v.text }}</td>{% endfor %}</tr>
{% for row in config_rows %}<tr class="{{ row.cls }}" data-config="{{ row.label }}"><td class="l id">{{ row.label }}{{ row.star }}</td>
<td class="l wrap"><b>{{ row.guarantee }}</b><br><span class="muted">{{ row.guarantee_detail }}</span></td>
{% for v in row.cells %}<td class="{{ v.cls }}">{{ v.text }}</td>{% endfor %}</tr>
{% endfor %}</table></div>
{% if baselines %}<h2>Text-level baselines</h2><p class="muted">Sanitising the text before embedding
([T26] App. F.3, Table 9). R = ΔLeakage / ΔUtility relative to the unprotected embeddings: leakage
removed per unit of utility lost (higher is better).</p>
<div class="scroll"><table>
<tr>{% for k in baselines.columns %}<th class="l{% if loop.first %} id{% endif %}">{{ k }}</th>{% endfor %}</tr>
{% for r in baselines.rows %}<tr>{% for v in r %}<td class="l{% if loop.first %} id{% endif %}">{{ v }}</td>{% endfor %}</tr>
{% endfor %}</table></div>
{% endif %}
<h2>Sweep settings</h2>
{{ kv_table(sweep) }}
<h2>What the columns mean</h2>
<table><tr><th class='l'>column</th><th class='l'>kind</th><th class='l'>attack status</th><th class='l'>meaning</th></tr>
{% for c in column_rows %}<tr><td class='l'><code>{{ c.name }}</code></td><td class='l'>{{ c.kind }}</td>
<td class='l{% if c.weak %} weak{% endif %}'>{{ c.status }}</td><td class='l'>{{ c.description }}</td></tr>
{% endfor %}</table>
<p class="muted">Files next to this page: results.csv (tidy: one row per configuration and metric,
with each attack column's status), results.parquet, results.json, runs.csv, and every plot as PNG and SVG.</p>
</body></html>
"""
