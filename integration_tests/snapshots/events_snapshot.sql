{# A snapshot under the project's post-hook: its first run creates the table, later runs MERGE new
   versions of the rows whose amount changed (var batch) into it, leaving deletion vectors; the
   post-hook's auto compaction (min_num_files: 2) rewrites those files without them. #}
{% snapshot events_snapshot %}
{{ config(
    unique_key='id',
    strategy='check',
    check_cols=['amount'],
    file_format='delta',
    tblproperties={'delta.enableDeletionVectors': 'true'},
    meta={'delta_optimize': {'mode': 'auto', 'min_num_files': 2}}
) }}
select id, user_id, amount + case when id % 4 = 0 then {{ var('batch', 0) }} else 0 end as amount
from {{ ref('raw_events') }}
{% endsnapshot %}
