-- Per club status and channel: ratings, the star distribution, and the unmatched ones.
SELECT
  coalesce(club_status, 'none') AS club_status,
  coalesce(channel, 'unknown') AS channel,
  count(*) AS ratings,
  round(avg(stars), 3) AS average_stars,
  count_if(stars = 1) AS one_star,
  count_if(stars = 5) AS five_stars,
  count_if(NOT customer_matched) AS unmatched,
  max(rating_time) AS last_rating_time
FROM enriched
GROUP BY coalesce(club_status, 'none'), coalesce(channel, 'unknown')
