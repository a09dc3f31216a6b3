{#- The nodes run-operation maintain works on: models and snapshots that `select` names (names, tag:NAME or *;
    a string of space-separated selectors or a list), except views, ephemerals and meta.delta_optimize.skip. -#}
{% macro _delta_maintain_select(select) %}
  {% set selectors = select.split() if select is string else select %}
  {% set nodes = [] %}
  {% for node in graph.nodes.values() if node.resource_type in ('model', 'snapshot')
                                        and node.config.materialized not in ('view', 'ephemeral') %}
    {% set ns = namespace(hit=false) %}
    {% for s in selectors %}
      {% if s == '*' or s == node.name or (s.startswith('tag:') and s[4:] in node.tags) %}{% set ns.hit = true %}{% endif %}
    {% endfor %}
    {% if ns.hit and not (node.config.get('meta', {}).get('delta_optimize', {}) or {}).get('skip') %}
      {% do nodes.append({'table': node.schema ~ '.' ~ node.alias, 'model': node.name,
                          'file_format': node.config.get('file_format')}) %}
    {% endif %}
  {% endfor %}
  {{ return(nodes) }}
{% endmacro %}

{#- Run the bridge's maintain over `nodes`, log one line per table, fail on bad arguments. -#}
{% macro _delta_maintain_run(nodes, budget, max_tables, only, dry_run, workers) %}
  {% if dry_run is not sameas true and dry_run is not sameas false %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.maintain: dry_run must be true or false, got " ~ dry_run) }}
  {% endif %}
  {% set bridge = dbt_delta_optimize._delta_optimize_bridge() %}
  {% set result = bridge.run_maintain(nodes, budget=budget, max_tables=max_tables, only=only, dry_run=dry_run,
                                      workers=workers, target_path=flags.TARGET_PATH,
                                      storage_options=var('delta_optimize_storage_options', none),
                                      spark_target=dbt_delta_optimize._delta_optimize_spark_target()) %}
  {% for line in result.lines %}{{ log(line, info=true) }}{% endfor %}
  {% if result.error %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.maintain: " ~ result.error) }}
  {% endif %}
  {{ return(result) }}
{% endmacro %}
