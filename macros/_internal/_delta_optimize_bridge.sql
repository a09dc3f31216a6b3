{#- The bridge namespace (modules.delta_optimize), with a clear error when the Python package is not installed. -#}
{% macro _delta_optimize_bridge() %}
  {% set bridge = modules.get('delta_optimize') %}
  {% if bridge is none %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize: the Python package is not installed in dbt's environment (pip install dbt-delta-optimize).") }}
  {% endif %}
  {{ return(bridge) }}
{% endmacro %}
