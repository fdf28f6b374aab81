-- Per customer id (matched or not): counts, average stars, the first and last rating times, and
-- the last rating (by rating_time, then rating_id) with the customer as it was then.
-- Unhappy: stars below VIEWS_JOB_UNHAPPY_STARS_BELOW (3 here, its default).
SELECT
  user_id,
  count(*) AS ratings,
  sum(CAST(stars < 3 AS BIGINT)) AS unhappy_ratings,
  sum(CAST(stars AS BIGINT)) AS stars_sum,
  round(sum(CAST(stars AS BIGINT)) / count(*), 3) AS average_stars,
  min(rating_time) AS first_rating_time,
  max(rating_time) AS last_rating_time,
  max(struct(rating_time, rating_id, stars, channel, message, club_status, full_name, customer_matched)).rating_id
    AS last_rating_id,
  max(struct(rating_time, rating_id, stars, channel, message, club_status, full_name, customer_matched)).stars
    AS last_stars,
  max(struct(rating_time, rating_id, stars, channel, message, club_status, full_name, customer_matched)).channel
    AS last_channel,
  max(struct(rating_time, rating_id, stars, channel, message, club_status, full_name, customer_matched)).message
    AS last_message,
  max(struct(rating_time, rating_id, stars, channel, message, club_status, full_name, customer_matched)).club_status
    AS club_status,
  max(struct(rating_time, rating_id, stars, channel, message, club_status, full_name, customer_matched)).full_name
    AS full_name,
  max(struct(rating_time, rating_id, stars, channel, message, club_status, full_name, customer_matched))
    .customer_matched AS customer_matched
FROM enriched
GROUP BY user_id
