{# Appended once per run (var batch): each run adds a small file to every partition, until
   auto compaction (min_num_files: 3) compacts the partitions this run touched. #}
{{ config(
    materialized='incremental',
    incremental_strategy='append',
    partition_by=['event_date'],
    meta={'delta_optimize': {'mode': 'auto', 'min_num_files': 3}}
) }}
select
    id + {{ var('batch', 0) }} * 1000 as id,
    cast(event_date as date) as event_date,
    user_id,
    amount,
    {{ var('batch', 0) }} as batch
from {{ ref('raw_events') }}
