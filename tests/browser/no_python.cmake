# tune_report.browser without python3: the check is a python3 script (tests/browser/check_report.py).
message(FATAL_ERROR "tune_report.browser needs python3 to run tests/browser/check_report.py; "
                    "install it (sudo apt-get install -y python3) and configure again")
