"""`python -m tether_approvals`: run the approvals service until SIGTERM."""

from tether_approvals.app import SERVICE, create_app
from tether_approvals.settings import ApprovalSettings
from tether_common.service import run_main

if __name__ == "__main__":
    run_main(SERVICE, ApprovalSettings, create_app)
