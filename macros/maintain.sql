{#- dbt run-operation maintain --args '{select: "*", budget: 20m, max_tables: 5, only: "optimize,purge", dry_run: true}'
    Ranks the selected Delta models and snapshots (names, tag:NAME, or * for all) by what maintenance would buy,
    from their logs, and runs the most valuable work first within the budget (the rest is deferred).
    Views, ephemerals and models with meta.delta_optimize.skip are left out; non-Delta tables are skipped.
    Writes target/delta_maintenance.json; the previous one calibrates the cost predictions. -#}
{% macro maintain(select='*', budget=none, max_tables=none, only=none, dry_run=false, workers=none) %}
  {{ return(adapter.dispatch('maintain', 'dbt_delta_optimize')(select, budget, max_tables, only, dry_run, workers)) }}
{% endmacro %}

{% macro default__maintain(select, budget, max_tables, only, dry_run, workers) %}
  {% if not execute %}{{ return('') }}{% endif %}
  {% if not (select is string or (select is iterable and select is not mapping)) %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.maintain: select must be a string or a list of selectors, got " ~ select) }}
  {% endif %}
  {% do run_query('select 1') %}
  {% set nodes = dbt_delta_optimize._delta_maintain_select(select) %}
  {{ return(dbt_delta_optimize._delta_maintain_run(nodes, budget, max_tables, only, dry_run, workers)) }}
{% endmacro %}

{#- on-run-end: maintain the Delta models and snapshots this run built, within a budget.
    on-run-end: ["{{ dbt_delta_optimize.maintain_on_run_end(results, budget='20m') }}"] -#}
{% macro maintain_on_run_end(results=none, budget=none, max_tables=none, only=none, workers=none) %}
  {% if not execute or dbt_delta_optimize._delta_optimize_skip_run() %}{{ return('') }}{% endif %}
  {% if results is none or results is string or results is mapping or results is not iterable %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.maintain_on_run_end needs dbt's run results: call it as dbt_delta_optimize.maintain_on_run_end(results) in on-run-end.") }}
  {% endif %}
  {% set nodes = [] %}
  {% for res in results if res.node.resource_type in ('model', 'snapshot') and res.status == 'success'
                          and res.node.config.materialized not in ('view', 'ephemeral')
                          and not (res.node.config.get('meta', {}).get('delta_optimize', {}) or {}).get('skip') %}
    {% do nodes.append({'table': res.node.schema ~ '.' ~ res.node.alias, 'model': res.node.name,
                        'file_format': res.node.config.get('file_format')}) %}
  {% endfor %}
  {% do dbt_delta_optimize._delta_maintain_run(nodes, budget, max_tables, only, false, workers) %}
  {{ return('') }}
{% endmacro %}
