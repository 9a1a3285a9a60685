"""`python -m tether_tools_runner`: run the tools-runner until SIGTERM."""

from tether_common.service import run_main
from tether_tools_runner.app import SERVICE, create_app
from tether_tools_runner.settings import RunnerSettings

if __name__ == "__main__":
    run_main(SERVICE, RunnerSettings, create_app)
