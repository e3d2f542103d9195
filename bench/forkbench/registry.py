"""forkbench.registry -- make bench's scenarios: each name, the function that
runs one run of it, and the servers it runs when --variants does not say.

A run function takes (run, args, say) -- one server of run.variant at
run.size in repetition run.rep, the options, the progress line -- and
returns that run's figures (metric -> value). Each scenario's module builds
on forkbench.phases and imports no other scenario's module; cli runs every
run through SCENARIOS.

A new scenario is one module and one line here. The report, tables, plots,
time estimate and memory check treat a scenario they do not know as the
fork scenario until told otherwise (report.py, tables.py, plots.py,
runplan.py and variants.py's memory factors name scenarios).
"""
import collections

from . import fork, growth, shapes, sites, steady

Scenario = collections.namedtuple("Scenario", "run variants")

# The other fork sites: stock, redis-afork as shipped and with fork-thp
# forced on, as the BGSAVE scenarios between them.
SITE_VARIANTS = "stock redis-afork afork-thp-collapse"

# fork-thp's default (the fills and the shapes): stock, redis-afork as
# shipped, fork-thp auto and fork-thp yes with its defaults.
GROWTH_VARIANTS = "stock redis-afork afork-thp-auto afork-thp-collapse"

SCENARIOS = {
    "fork": Scenario(fork.run_fork, "stock redis-afork"),
    # afork-thp (no re-collapse) is the ablation: --variants adds it.
    "steady": Scenario(steady.run_steady, "stock afork-thp-collapse"),
    "aofrewrite": Scenario(sites.run_site, SITE_VARIANTS),
    "sync-disk": Scenario(sites.run_site, SITE_VARIANTS),
    "sync-diskless": Scenario(sites.run_site, SITE_VARIANTS),
    "fill": Scenario(growth.run_fill, GROWTH_VARIANTS),
    "fill-fragmented": Scenario(growth.run_fill, GROWTH_VARIANTS),
    "shapes": Scenario(shapes.run_shapes, GROWTH_VARIANTS),
}
