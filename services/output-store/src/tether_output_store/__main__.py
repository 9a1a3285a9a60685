"""`python -m tether_output_store`: run the output-store until SIGTERM."""

from tether_common.service import run_main
from tether_output_store.app import SERVICE, create_app
from tether_output_store.settings import OutputSettings

if __name__ == "__main__":
    run_main(SERVICE, OutputSettings, create_app)
