from lookupkit.bench.startup.run import main

main()
