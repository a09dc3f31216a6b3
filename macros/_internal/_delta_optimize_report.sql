{#- Log one result line through dbt's logger; fail the caller only when on_error is 'fail'. A warning
    (settings a SQL connection cannot apply) is one more line, as a dbt warning. -#}
{% macro _delta_optimize_report(result, on_error='warn') %}
  {% if result.get('warning') %}
    {{ exceptions.warn(result.warning) }}
  {% endif %}
  {% if result.status == 'failed' %}
    {% if on_error == 'fail' %}
      {{ exceptions.raise_compiler_error(result.line) }}
    {% else %}
      {{ exceptions.warn(result.line) }}
    {% endif %}
  {% elif not result.get('quiet') %}
    {{ log(result.line, info=true) }}
  {% endif %}
{% endmacro %}
