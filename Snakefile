from snakemake.utils import min_version

min_version("9.0")


# The default study, unless a --configfile names another: never both (their datasets and
# experiments would merge).
if not workflow.config_settings.configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/plots.smk"
include: "workflow/rules/status.smk"


# The report's front page: the study's headline numbers, then workflow/report/workflow.rst
# (written by the aggregate job, so `--report` after a run opens with what it measured).
report: rules.aggregate.output.front_page


rule all:
    default_target: True
    input:
        get_final_targets(),
    localrule: True
