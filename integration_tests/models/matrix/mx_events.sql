{# The upstream of the hook's matrix (tests/dbt_project.py, matrix_run), a table the run creates: 2000 rows over the
   5 days up to today (partition d), every row at midday (event_time ts), 8 files per day. #}
{{ config(materialized='table', partition_by=['d'], event_time='ts') }}
select /*+ REPARTITION(8) */
    id,
    cast(d as date) as d,
    to_timestamp(concat(d, ' 12:', lpad(cast(id % 60 as string), 2, '0'), ':00')) as ts,
    cast(id % 7 as int) as user_id,
    cast(id as double) as amount
from (select id, date_format(date_add(current_date(), cast(id % 5 as int) - 4), 'yyyy-MM-dd') as d from range(0, 2000))
