{# A snapshot in the matrix (post-hook only): created by the first run, MERGEd by the second (var batch). #}
{% snapshot mx_snapshot %}
{{ config(unique_key='id', strategy='check', check_cols=['amount'], file_format='delta') }}
select /*+ REPARTITION(3) */ id, amount + case when id % 10 = 0 then {{ var('batch', 0) }} else 0 end as amount
from {{ ref('mx_events') }}
{% endsnapshot %}
