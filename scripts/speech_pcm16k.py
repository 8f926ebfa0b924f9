#!/usr/bin/env python3
"""Raw 16 kHz mono PCM16 on stdout from WAV files (any rate, resampled by FFT) and seconds of
silence: the input of `tg embed-audio --stream`, for trying the stream without a microphone.

    espeak-ng -w hey.wav "hey jarvis"
    target/py-venv/bin/python scripts/speech_pcm16k.py silence hey.wav silence | tg embed-audio --stream --wakeword hey_jarvis

Each argument is a WAV file (PCM16, mono) or the word `silence` (one second of zeros). Needs
numpy (target/py-venv, which scripts/test_python.sh makes, has it).
"""
import sys, wave, numpy as np
out = []
for path in sys.argv[1:]:
    if path == "silence":
        out.append(np.zeros(16000, np.int16)); continue
    with wave.open(path) as f:
        rate = f.getframerate(); x = np.frombuffer(f.readframes(f.getnframes()), np.int16).astype(np.float64)
    n = int(np.ceil(len(x) * 16000 / rate)); spec = np.fft.rfft(x); o = np.zeros(n // 2 + 1, complex); k = min(len(o), len(spec)); o[:k] = spec[:k]
    out.append(np.clip(np.round(np.fft.irfft(o, n) * n / len(x)), -32768, 32767).astype(np.int16))
sys.stdout.buffer.write(np.concatenate(out).tobytes())
