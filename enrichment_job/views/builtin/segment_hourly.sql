-- Per club status ("unmatched" for ratings without a customer), channel and UTC hour of
-- rating_time: counts, average stars and distinct customers. The job also refuses a rating that
-- arrives after its hour's window has closed (VIEWS_JOB_WINDOW_LATENESS_S, 1 hour by default,
-- on the record's CDC clock) and sends it to the views' dead-letter topic.
-- Unhappy: stars below VIEWS_JOB_UNHAPPY_STARS_BELOW (3 here, its default).
-- watermark: rating_ts 65 minutes
SELECT
  CASE WHEN customer_matched THEN coalesce(club_status, 'unknown') ELSE 'unmatched' END AS club_status,
  coalesce(channel, 'unknown') AS channel,
  date_format(window.start, "yyyy-MM-dd'T'HH") AS hour,
  unix_millis(window.start) AS hour_start_ms,
  count(*) AS ratings,
  sum(CAST(stars AS BIGINT)) AS stars_sum,
  round(sum(CAST(stars AS BIGINT)) / count(*), 3) AS average_stars,
  sum(CAST(stars < 3 AS BIGINT)) AS unhappy_ratings,
  size(collect_set(user_id)) AS customers,
  max(rating_time) AS last_rating_time
FROM enriched
GROUP BY 1, 2, window(rating_ts, '1 hour')
