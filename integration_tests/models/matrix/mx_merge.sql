{# merge: the 4 days before today when created, then the rows of
   3 days ago changed and today's inserted. #}
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id', partition_by=['d']) }}
select /*+ REPARTITION(3) */ id, d, ts, user_id, amount + {{ 1 if is_incremental() else 0 }} as amount
from {{ ref('mx_events') }}
{% if is_incremental() %}
where d in (date_sub(current_date(), 3), current_date())
{% else %}
where d < current_date()
{% endif %}
