DROP TABLE IF EXISTS event_listeners;
