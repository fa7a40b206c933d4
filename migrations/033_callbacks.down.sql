DROP TABLE callbacks;
