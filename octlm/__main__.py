from octlm.cli.app import main

main()
