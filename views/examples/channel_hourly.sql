-- Ratings per channel and UTC hour, with the unhappy ones and the customers behind them.
-- An hour's rows leave the view two days after a newer hour has come.
-- watermark: rating_ts 2 hours
-- retention: 2 days
-- trigger: 5 seconds
SELECT
  coalesce(channel, 'unknown') AS channel,
  date_format(window.start, "yyyy-MM-dd'T'HH") AS hour,
  window.start AS hour_start,
  count(*) AS ratings,
  count_if(stars < 3) AS unhappy_ratings,
  approx_count_distinct(user_id) AS customers,
  max(rating_time) AS last_rating_time
FROM enriched
GROUP BY coalesce(channel, 'unknown'), window(rating_ts, '1 hour')
