{# Rebuilt each run as several files; its post-hook makes it CLUSTER BY (user_id, amount) and clusters it. #}
{{ config(
    materialized='table',
    meta={'delta_optimize': {'liquid_clustered_by': ['user_id', 'amount']}}
) }}
select /*+ REPARTITION(4) */ id, cast(event_date as date) as event_date, user_id, amount
from {{ ref('raw_events') }}
