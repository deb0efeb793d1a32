from lookupkit.bench.engines.run import main

main()
