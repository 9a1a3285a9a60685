"""Schedules: runs started on a clock (a cron expression in a time zone, or an interval).
Owns the `schedules` and `schedule_firings` rows (`tables`, `store`), when ticks fall
(`timing`), what a claim does (`plan`), the scheduler each replica runs (`firing`) and
the operations the API calls (`manager`). Starts runs only through `RunManager`, as the
schedule's principal; never runs a loop or a tool itself."""

from tether_brain.schedules.firing import Scheduler
from tether_brain.schedules.manager import ScheduleManager
from tether_brain.schedules.store import ScheduleStore

__all__ = ["ScheduleManager", "ScheduleStore", "Scheduler"]
