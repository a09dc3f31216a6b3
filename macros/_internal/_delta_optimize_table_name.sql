{#- A table's name as dbt's relation renders it (catalog.schema.table where the adapter has catalogs,
    schema.table on dbt-spark; quoted per the adapter's policy): `this`, or a graph node or run result's node. -#}
{% macro _delta_optimize_table_name(relation=none, node=none) %}
  {% if relation is not none %}{{ return(relation.render()) }}{% endif %}
  {{ return(api.Relation.create(database=node.database, schema=node.schema, identifier=node.alias).render()) }}
{% endmacro %}
