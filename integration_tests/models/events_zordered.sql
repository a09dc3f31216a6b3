{# Rebuilt each run as several files, then Z-ordered by (user_id, amount) in its post-hook. #}
{{ config(
    materialized='table',
    meta={'delta_optimize': {'mode': 'optimize', 'zorder_by': ['user_id', 'amount']}}
) }}
select /*+ REPARTITION(4) */ id, cast(event_date as date) as event_date, user_id, amount
from {{ ref('raw_events') }}
