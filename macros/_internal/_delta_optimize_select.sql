{#- The tables run-operation optimize works on: `table` (schema.table) and the models `select` names
    (names, tag:NAME, or * for every model; a string of space-separated selectors or a list).
    Models with meta.delta_optimize.skip are logged and left out. -#}
{% macro _delta_optimize_select(select, table) %}
  {% set targets = [] %}
  {% if table is not none %}
    {% do targets.append({'table': table, 'model': none, 'file_format': none, 'meta': none}) %}
  {% endif %}
  {% if select is none %}{{ return(targets) }}{% endif %}
  {% set selectors = select.split() if select is string else select %}
  {% for node in graph.nodes.values() if node.resource_type == 'model' and node.config.materialized != 'ephemeral' %}
    {% set ns = namespace(hit=false) %}
    {% for s in selectors %}
      {% if s == '*' or s == node.name or (s.startswith('tag:') and s[4:] in node.tags) %}{% set ns.hit = true %}{% endif %}
    {% endfor %}
    {% if ns.hit and (node.config.get('meta', {}).get('delta_optimize', {}) or {}).get('skip') %}
      {{ log('delta_optimize ' ~ node.name ~ ': skipped (meta.delta_optimize.skip)', info=true) }}
    {% elif ns.hit %}
      {% do targets.append({'table': dbt_delta_optimize._delta_optimize_table_name(node=node), 'model': node.name,
                            'file_format': node.config.get('file_format'),
                            'meta': node.config.get('meta', {}).get('delta_optimize', none)}) %}
    {% endif %}
  {% endfor %}
  {% if targets | length == 0 %}
    {{ log('delta_optimize: no model matched select=' ~ select, info=true) }}
  {% endif %}
  {{ return(targets) }}
{% endmacro %}
