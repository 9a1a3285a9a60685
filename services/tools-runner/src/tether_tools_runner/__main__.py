"""`python -m tether_tools_runner`: run the tools-runner until SIGTERM."""

from tether_common.service import run_main
from tether_tools_runner.app import SERVICE, create_app
from tether_tools_runner.settings import RunnerSettings

if __name__ == "__main__":
    # The standard loop: the sandbox's child set-up (`preexec_fn`: cgroups, mounts, the
    # sandbox user) relies on CPython's order of the child's steps (chdir before it,
    # descriptors closed after it); uvloop's libuv spawn orders them differently, and the
    # sandbox user can then not enter its workspace.
    run_main(SERVICE, RunnerSettings, create_app, standard_loop=True)
