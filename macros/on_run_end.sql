{#- on-run-end: one pass over everything the run built (instead of per-model post-hooks).
    on-run-end: ["{{ dbt_delta_optimize.on_run_end(results) }}"] -#}
{% macro on_run_end(results) %}
  {{ return(adapter.dispatch('on_run_end', 'dbt_delta_optimize')(results)) }}
{% endmacro %}

{% macro default__on_run_end(results) %}
  {% if not execute or dbt_delta_optimize._delta_optimize_skip_run() %}{{ return('') }}{% endif %}
  {% set bridge = dbt_delta_optimize._delta_optimize_bridge() %}
  {% for res in results if res.node.resource_type == 'model' and res.status == 'success' %}
    {% set settings = res.node.config.get('meta', {}).get('delta_optimize', {}) or {} %}
    {% set result = bridge.run_model(res.node.schema ~ '.' ~ res.node.alias, settings, model=res.node.name,
                                     file_format=res.node.config.get('file_format')) %}
    {% do dbt_delta_optimize._delta_optimize_report(result, settings.get('on_error', 'warn')) %}
  {% endfor %}
  {{ return('') }}
{% endmacro %}
