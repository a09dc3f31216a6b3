{#- Log one result line through dbt's logger; fail the caller only when on_error is 'fail'. -#}
{% macro _delta_optimize_report(result, on_error='warn') %}
  {% if result.status == 'failed' %}
    {% if on_error == 'fail' %}
      {{ exceptions.raise_compiler_error(result.line) }}
    {% else %}
      {{ exceptions.warn(result.line) }}
    {% endif %}
  {% else %}
    {{ log(result.line, info=true) }}
  {% endif %}
{% endmacro %}


{#- True when the run was told to skip all optimization: --vars '{DELTA_OPTIMIZE_SKIP: true}'. -#}
{% macro _delta_optimize_skip_run() %}
  {{ return(var('DELTA_OPTIMIZE_SKIP', false) in [true, 'true', 'True', 1, '1']) }}
{% endmacro %}


{#- The bridge namespace, with a clear error when the Python package is not installed. -#}
{% macro _delta_optimize_bridge() %}
  {% set bridge = modules.get('delta_optimize') %}
  {% if bridge is none %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize: the Python package is not installed in dbt's environment (pip install dbt-delta-optimize).") }}
  {% endif %}
  {{ return(bridge) }}
{% endmacro %}
