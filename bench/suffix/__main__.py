from lookupkit.bench.suffix.run import main

main()
