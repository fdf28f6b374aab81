-- Per platinum customer: ratings, average stars, and the last message they wrote.
SELECT
  user_id,
  count(*) AS ratings,
  round(avg(stars), 3) AS average_stars,
  max_by(message, rating_time) AS last_message,
  max(rating_time) AS last_rating_time
FROM enriched
WHERE club_status = 'platinum'
GROUP BY user_id
