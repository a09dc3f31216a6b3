{# MERGE into a table with deletion vectors: each incremental run (var batch) changes every third row,
   so the MERGE marks those rows deleted in their old files (deletion vectors) and writes their new
   versions to new files; the post-hook's auto compaction (min_num_files: 2) rewrites the small files
   without the deleted rows. --full-refresh rebuilds it from scratch. #}
{{ config(
    materialized='incremental',
    incremental_strategy='merge',
    unique_key='id',
    tblproperties={'delta.enableDeletionVectors': 'true'},
    meta={'delta_optimize': {'mode': 'auto', 'min_num_files': 2}}
) }}
select /*+ REPARTITION(2) */
    id,
    user_id,
    amount + case when id % 3 = 0 then {{ var('batch', 0) }} else 0 end as amount,
    {{ var('batch', 0) }} as batch
from {{ ref('raw_events') }}
{% if is_incremental() %}
where id % 3 = 0
{% endif %}
