from celtk.cli import run

run()
