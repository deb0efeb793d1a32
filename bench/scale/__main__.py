from lookupkit.bench.scale.run import main

main()
