"""`python -m tether_gateway`: run the gateway until SIGTERM."""

from tether_common.service import run_main
from tether_gateway.app import SERVICE, create_app
from tether_gateway.settings import GatewaySettings

if __name__ == "__main__":
    run_main(SERVICE, GatewaySettings, create_app)
