from lookupkit.bench.calibration.run import main

main()
