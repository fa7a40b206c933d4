DROP VIEW cairn_workflow_versions;
