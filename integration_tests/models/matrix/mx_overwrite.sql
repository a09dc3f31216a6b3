{# insert_overwrite: the 4 days before today when created, then 3 days ago and today replaced (3 files each). #}
{{ config(materialized='incremental', incremental_strategy='insert_overwrite', partition_by=['d']) }}
select /*+ REPARTITION(3) */ id, d, ts, user_id, amount from {{ ref('mx_events') }}
{% if is_incremental() %}
where d in (date_sub(current_date(), 3), current_date())
{% else %}
where d < current_date()
{% endif %}
