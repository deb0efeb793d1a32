from lookupkit.bench.sources.run import main

main()
