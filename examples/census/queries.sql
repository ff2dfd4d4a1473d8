-- A dozen analyst queries, answered as ONE private batch.
-- 1. Population by sex
SELECT sex, COUNT(*) AS people FROM census GROUP BY sex;
-- 2. Working-age adults
SELECT COUNT(*) AS working_age FROM census WHERE age BETWEEN 18 AND 64;
-- 3. Age pyramid: 5-year bands by sex
SELECT age, sex, COUNT(*) AS people FROM census GROUP BY age, sex;
-- 4. The ten most populous states
SELECT state, COUNT(*) AS people FROM census GROUP BY state ORDER BY people DESC LIMIT 10;
-- 5. Mean income by education
SELECT education, AVG(income) AS mean_income FROM census GROUP BY education;
-- 6. Total income by sex
SELECT sex, SUM(income) AS total_income FROM census GROUP BY sex;
-- 7. High earners
SELECT COUNT(*) AS high_earners FROM census WHERE income >= 100000;
-- 8. Seniors by race
SELECT race, COUNT(*) AS seniors FROM census WHERE age >= 65 GROUP BY race;
-- 9. Women working full time
SELECT COUNT(*) AS women_full_time FROM census WHERE hours >= 40 AND sex = 'F';
-- 10. People working by 10-hour band, among adults
SELECT hours, COUNT(*) AS workers FROM census WHERE hours > 0 AND age >= 18 GROUP BY hours;
-- 11. Three large states
SELECT COUNT(*) AS people FROM census WHERE state IN ('CA', 'NY', 'TX');
-- 12. Dependents: children or seniors
SELECT COUNT(*) AS dependents FROM census WHERE age < 18 OR age >= 65;
