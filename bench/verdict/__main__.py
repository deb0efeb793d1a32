from lookupkit.bench.verdict.run import main

main()
