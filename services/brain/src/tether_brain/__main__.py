"""`python -m tether_brain`: run the brain until SIGTERM."""

from tether_brain.app import SERVICE, create_app
from tether_brain.settings import BrainSettings
from tether_common.service import run_main

if __name__ == "__main__":
    run_main(SERVICE, BrainSettings, create_app)
