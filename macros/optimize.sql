{#- dbt run-operation optimize --args '{select: "model_a model_b" | table: schema.table, where: ..., zorder_by: [...], dry_run: true}'
    Optimizes every selected Delta model (names, tag:NAME, or * for all models) and logs one line per table. -#}
{% macro optimize(select=none, table=none, where=none, zorder_by=none, dry_run=false) %}
  {{ return(adapter.dispatch('optimize', 'dbt_delta_optimize')(select, table, where, zorder_by, dry_run)) }}
{% endmacro %}

{% macro default__optimize(select, table, where, zorder_by, dry_run) %}
  {% if not execute %}{{ return('') }}{% endif %}
  {% if select is none and table is none %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.optimize needs select (model names, tag:NAME or *) or table (schema.table).") }}
  {% endif %}
  {% set bridge = dbt_delta_optimize._delta_optimize_bridge() %}
  {#- run-operation may not have opened the adapter's session yet: make dbt-spark create it, with the profile's confs -#}
  {% do run_query('select 1') %}
  {% set targets = [] %}
  {% if table is not none %}
    {% do targets.append({'table': table, 'model': none, 'file_format': none}) %}
  {% endif %}
  {% if select is not none %}
    {% set selectors = select.split() if select is string else select %}
    {% for node in graph.nodes.values() if node.resource_type == 'model' and node.config.materialized != 'ephemeral' %}
      {% set ns = namespace(hit=false) %}
      {% for s in selectors %}
        {% if s == '*' or s == node.name or (s.startswith('tag:') and s[4:] in node.tags) %}{% set ns.hit = true %}{% endif %}
      {% endfor %}
      {% if ns.hit %}
        {% if node.config.get('meta', {}).get('delta_optimize', {}).get('skip') %}
          {{ log('delta_optimize ' ~ node.name ~ ': skipped (meta.delta_optimize.skip)', info=true) }}
        {% else %}
          {% do targets.append({'table': node.schema ~ '.' ~ node.alias, 'model': node.name, 'file_format': node.config.get('file_format')}) %}
        {% endif %}
      {% endif %}
    {% endfor %}
    {% if targets | length == 0 %}
      {{ log('delta_optimize: no model matched select=' ~ select, info=true) }}
    {% endif %}
  {% endif %}
  {% for t in targets %}
    {% set result = bridge.run_operation(t.table, where=where, zorder_by=zorder_by, dry_run=dry_run, model=t.model, file_format=t.file_format) %}
    {% do dbt_delta_optimize._delta_optimize_report(result, 'warn') %}
  {% endfor %}
{% endmacro %}
