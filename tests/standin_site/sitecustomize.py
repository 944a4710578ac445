"""On PYTHONPATH of the command-line processes a test starts (tests/test_training_job.py::test_the_cli): IAM answers
AccessDenied to iam:SimulatePrincipalPolicy, as it does a caller without that permission. moto has no such call (it
answers 500), and sagemaker-core before 2.25 makes it whatever SAGEMAKER_VALIDATE_ROLE says; the SDK then warns and
goes on, as it does with a real account that may not simulate policies."""
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
try:
    from local_services import deny_simulate_principal_policy
    deny_simulate_principal_policy()
finally: sys.path.pop(0)
