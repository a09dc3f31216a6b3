{#- The argument checks every table run-operation (optimize, purge, and new ones) makes, in one place:
    select or table given, each of the right type, dry_run a boolean, settings a mapping. -#}
{% macro _delta_optimize_check_args(operation, select, table, dry_run, settings=none) %}
  {% set prefix = 'dbt_delta_optimize.' ~ operation %}
  {% if select is none and table is none %}
    {{ exceptions.raise_compiler_error(prefix ~ " needs select (model names, tag:NAME or *) or table (schema.table).") }}
  {% endif %}
  {% if select is not none and not (select is string or (select is iterable and select is not mapping)) %}
    {{ exceptions.raise_compiler_error(prefix ~ ": select must be a string or a list of selectors, got " ~ select) }}
  {% endif %}
  {% if table is not none and table is not string %}
    {{ exceptions.raise_compiler_error(prefix ~ ": table must be a string (schema.table), got " ~ table) }}
  {% endif %}
  {% if dry_run is not sameas true and dry_run is not sameas false %}
    {{ exceptions.raise_compiler_error(prefix ~ ": dry_run must be true or false, got " ~ dry_run) }}
  {% endif %}
  {% if settings is not none and settings is not mapping %}
    {{ exceptions.raise_compiler_error(prefix ~ ": settings must be a mapping of OPTIMIZE settings, got " ~ settings) }}
  {% endif %}
{% endmacro %}
