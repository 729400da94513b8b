-- Topics (API.md → Topics): every owner's tags with one normalised name (tags.name_key) are one
-- topic readers browse, whoever wrote the articles. This index finds a topic's tags by that key.
CREATE INDEX tags_by_key ON tags (name_key);
