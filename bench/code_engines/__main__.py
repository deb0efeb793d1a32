from lookupkit.bench.code_engines.run import main

main()
