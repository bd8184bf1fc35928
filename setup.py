"""The wheel carries ``conf/`` and ``paper/`` inside the package, as ``fedrun/conf/`` and ``fedrun/paper/``
(pyproject.toml holds everything else): they live at the repository's top, as a Hydra project's config root does, and
an installed fedrun finds them inside the package (``fedrun/shipped.py``)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithConfig(build_py):
    def run(self):
        super().run()
        if not self.editable_mode:  # an editable install reads the repository's conf/ in place
            for name in ("conf", "paper"):  # the folders fedrun/shipped.py:folder finds
                shutil.copytree(Path(__file__).parent / name, Path(self.build_lib) / "fedrun" / name,
                                dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildWithConfig})
