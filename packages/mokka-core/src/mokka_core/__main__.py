from .cli.mokka import main

main()
