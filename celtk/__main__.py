from celtk.cli import main

main()
