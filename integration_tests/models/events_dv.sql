{# Deletion vectors: its post-hook deletes a quarter of the rows (DVs, no rewrite);
   `dbt run-operation purge` then rewrites the files without them (REORG ... APPLY (PURGE)). #}
{{ config(
    materialized='table',
    tblproperties={'delta.enableDeletionVectors': 'true'},
    meta={'delta_optimize': {'mode': 'never'}},
    post_hook=["delete from {{ this }} where id % 4 = 0"]
) }}
select /*+ REPARTITION(2) */ id, user_id, amount from {{ ref('raw_events') }}
